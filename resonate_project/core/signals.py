"""Django signals for host code, sent after the transaction that caused them commits (never for
work that rolled back), from whichever process made the change (a request, the steps, a worker).

    from django.dispatch import receiver
    from resonate_project.core.signals import promise_settled

    @receiver(promise_settled)
    def on_settled(sender, id, state, settled_at, **kwargs): ...

Receivers run in the committing thread after commit and are called robustly: an exception in
one is logged and does not reach the request, the step or the other receivers.
"""

from django.dispatch import Signal

# sender: promises.models.Promise; id, state ("resolved", "rejected", "rejected_canceled",
# "rejected_timedout"), settled_at (ms).
promise_settled = Signal()

# sender: tasks_app.models.Task; id (the task's, which is its promise's id), state (the
# promise's): the task was fulfilled because its promise settled.
task_completed = Signal()
