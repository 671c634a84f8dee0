"""Wire request types for ``schedule.*``. See ``core/wire/promises.py`` for the rules."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, field

from resonate_project.core.limits import CRON_MAX_LENGTH, ID_MAX_LENGTH
from resonate_project.core.wire.promises import Id, Limit, Ms, Req, Tags, Text, Value, check_bytes


class ScheduleGetReq(Req):
    id: Id


class ScheduleCreateReq(Req, rename="camel"):
    id: Id
    cron: Annotated[str, Meta(max_length=CRON_MAX_LENGTH)]
    promise_id: Annotated[str, Meta(min_length=1, max_length=ID_MAX_LENGTH)]
    promise_timeout: Ms
    promise_param: Value = field(default_factory=Value)
    promise_tags: Tags = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        # Occurrence ids are promise ids: the expanded template must fit too.
        longest = self.promise_id.replace("{{.id}}", self.id).replace("{{.timestamp}}", "9" * 20)
        check_bytes("promiseId (expanded)", longest)


class ScheduleDeleteReq(Req):
    id: Id


class ScheduleSearchReq(Req):
    tags: Tags | None = None
    limit: Limit | None = None
    cursor: Text | None = None
    # Only ids starting with this (an extension; a prefix-limited credential is narrowed to its
    # prefix this way, see resonate_project/access/rules.py).
    idPrefix: Text | None = None
