"""``make chaos``: the production shape under load while its parts die, and a checker.

* :mod:`bench.chaos.cluster` starts a private PostgreSQL cluster and Redis server (never the
  machine's shared ones), two web processes, two Celery workers, one beat and the SDK workers, and
  injects the faults.
* :mod:`bench.chaos.load` drives workflows, human-in-the-loop settlements and a listener
  population (HTTP push and SSE), recording every status it sees and every ``unblock`` received.
* :mod:`bench.chaos.check` proves what the issue asks after the load stops.
* :mod:`bench.chaos.run` runs the scenarios and writes the table (``python -m bench.chaos``).

Everything listens on 127.0.0.1; every loop is bounded in count and time.
"""
