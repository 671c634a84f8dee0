"""The resource API under ``/api/``: promises, tasks and schedules as REST resources, beside the
protocol's envelope endpoint ``POST /``.

Reads are queries that serve the protocol's projected records and write nothing; writes call the
typed services (``promises.services``, ``tasks_app.services``, ``schedules.services``), which run
the same handlers as the envelope, with ``now`` read once per request in the view. Errors have
one shape, ``{"error": {"status", "message", "field"}}``.
"""
