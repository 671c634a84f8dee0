"""``outbox_committed`` fires after a transaction that wrote outbox rows commits; the delivery
layer connects to it to drain promptly instead of waiting for the periodic drain."""

from django.dispatch import Signal

outbox_committed = Signal()
