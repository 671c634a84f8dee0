"""The edges: everything a request, an operator or a command line comes in through.

The envelope (``POST /`` and its table of kinds), the resource API (``rest``), the command line
(``cli``), the admin kit and the operator's console (``admin``), the debug surface, and the
browser page at ``/``. Edges read the clock once and call the handlers and services of the apps;
nothing below them imports them (the import contract in ``pyproject.toml``).
"""
