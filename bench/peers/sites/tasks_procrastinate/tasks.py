"""The no-op task."""

from procrastinate.contrib.django import app


@app.task(name="noop")
def noop() -> int:
    return 1
