"""The runtime: what runs the internal steps and the delivery loops.

The step runner (``ticker``), Celery beat's metronome (``beat``), the in-process runner of the
embedded server (``embedded``), ``manage.py serve``'s bind check (``bind``) and the request
counters each web process flushes (``traffic``). Delivery itself (claims, push, the SSE hub) is the
``outbox`` app's.
"""
