"""Two real web processes sharing ``PROMETHEUS_MULTIPROC_DIR``: each answers requests, and the
metrics of either (``/metrics`` on its web port, or the one ``METRICS_PORT`` listener) are the
sum over both (docs/how-to/observability.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import require_services
from .harness import (
    FAR,
    PG_URL,
    Outbox,
    Stack,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_webs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Stack, int]]:
    require_services()
    logdir: Path = tmp_path_factory.mktemp("metrics")
    multiproc = logdir / "prometheus"
    multiproc.mkdir()
    metrics_port = free_port()
    name = create_pg_database()
    extra = {"PROMETHEUS_MULTIPROC_DIR": str(multiproc), "RESONATE_METRICS_PORT": str(metrics_port)}
    env = base_env(PG_URL.format(name=name), None, extra)
    stacks: list[Stack] = []
    try:
        migrate(env)
        for _ in range(2):
            stack = Stack("web", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(name))
            stacks.append(stack)
            stack.start_web("--no-embedded")
        yield stacks[0], stacks[1], metrics_port
    finally:
        for stack in stacks:
            stack.stop()
        drop_pg_database(name)


def request_total(url: str, kind: str) -> float:
    text = httpx.get(url, timeout=30).raise_for_status().text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "resonate_request_total" and sample.labels == {
                "kind": kind,
                "status": "200",
            }:
                return sample.value
    return 0.0


def test_either_process_shows_the_sum_of_both(two_webs: tuple[Stack, Stack, int]) -> None:
    a, b, metrics_port = two_webs
    for stack, n in ((a, 3), (b, 4)):
        for _ in range(n):
            stack.ok("promise.create", id=unique("mp"), timeoutAt=FAR)

    urls = [f"{a.base_url}/metrics", f"{b.base_url}/metrics"]
    urls.append(f"http://127.0.0.1:{metrics_port}/metrics")
    for url in urls:
        assert request_total(url, "promise.create") == 7, url


def test_the_metrics_port_listens_on_loopback_once(two_webs: tuple[Stack, Stack, int]) -> None:
    a, b, metrics_port = two_webs
    wait_until(
        lambda: httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).is_success,
        "the METRICS_PORT listener",
    )
    for stack in (a, b):
        assert stack.procs["web"].alive(), stack.tails()
