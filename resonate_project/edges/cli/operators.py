"""The local-only commands: service credentials, the Django Tasks worker, retention's prune."""

from __future__ import annotations

import argparse

from resonate_project.edges.cli.output import (
    table,
    when,
)
from resonate_project.edges.cli.transport import (
    CliError,
    Ctx,
)

# --- credentials --------------------------------------------------------------------------------


def credentials_create(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.credentials import CredentialError, credential_create

    try:
        credential, token = credential_create(
            name=args.name,
            now=ctx.now,
            prefix=args.prefix,
            groups=args.group,
            push_hosts=args.push_host,
            admin=args.admin,
        )
    except CredentialError as exc:
        raise CliError(str(exc)) from exc
    scope = "admin" if credential.admin else f"prefix {credential.prefix!r}"
    groups = ", ".join(credential.groups) or "any group"
    ctx.out(f"created credential {credential.name} ({scope}; streams {groups}); its token:")
    ctx.out(token)


def credentials_revoke(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.credentials import CredentialError, credential_revoke

    try:
        credential = credential_revoke(name=args.name, now=ctx.now)
    except CredentialError as exc:
        raise CliError(str(exc)) from exc
    ctx.out(f"revoked credential {credential.name}")


def credentials_list(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.models import ServiceCredential

    rows = [
        [
            c.name,
            "admin" if c.admin else repr(c.prefix),
            ",".join(c.groups) or "*",
            when(c.created_at),
            when(c.last_used_at),
            "revoked " + when(c.revoked_at) if c.revoked_at is not None else "active",
        ]
        for c in ServiceCredential.objects.all()
    ]
    headers = ["NAME", "PREFIX", "GROUPS", "CREATED", "LAST USED", "STATE"]
    for line in table(headers, rows) if rows else ["no credentials"]:
        ctx.out(line)


# --- the Django Tasks worker ---------------------------------------------------------------------


def worker(ctx: Ctx, args: argparse.Namespace) -> None:
    from django.tasks import task_backends
    from django.tasks.exceptions import InvalidTaskBackend

    from tasks_app.backends import ResonateBackend
    from tasks_app.worker import Worker

    try:
        backend = task_backends[args.backend]
    except InvalidTaskBackend as exc:
        raise CliError(str(exc)) from exc
    if not isinstance(backend, ResonateBackend):
        raise CliError(f"TASKS[{args.backend!r}] is not tasks_app.backends.ResonateBackend")
    if args.concurrency < 1:
        raise CliError("--concurrency must be at least 1")
    queues = args.queue or backend.worker_queues()
    Worker(backend, queues, args.concurrency, args.grace, ctx.out).run()


# --- retention ----------------------------------------------------------------------------------


def prune(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.core.conf import resonate_settings
    from resonate_project.engine.retention import Policy
    from resonate_project.engine.retention import prune as prune_all

    configured = Policy.from_settings()
    policy = Policy(
        promises_ms=configured.promises_ms if args.older_than is None else args.older_than,
        django_tasks_ms=configured.django_tasks_ms
        if args.django_tasks_older_than is None
        else args.django_tasks_older_than,
        dead_letters_ms=configured.dead_letters_ms
        if args.dead_letters_older_than is None
        else args.dead_letters_older_than,
    )
    if policy.off:
        raise CliError(
            "nothing to prune: no retention window (pass --older-than, or set RETENTION_MS, "
            "RETENTION_DJANGO_TASKS_MS or RETENTION_DEAD_LETTERS_MS)"
        )
    if args.pace < 0:
        raise CliError("--pace must be 0 or more")
    done = prune_all(
        ctx.now,
        policy,
        batch=resonate_settings().RETENTION_BATCH,
        dry_run=args.dry_run,
        pace=args.pace,
    )
    counts = {**done.counts(), "dry_run": args.dry_run}
    verb = "would delete" if args.dry_run else "deleted"
    ctx.show(
        counts,
        lambda: [
            f"{verb} {done.trees} trees ({done.promises} promises, {done.tasks} tasks, "
            f"{done.django_tasks} Django task results) and {done.dead_letters} dead letters"
        ],
    )
