"""Wire request types for ``schedule.*``. See ``promises/requests.py`` for the rules."""

from __future__ import annotations

from msgspec import Struct, field

from promises.requests import Id, Limit, Ms, Tags, Text, Value


class ScheduleGetReq(Struct):
    id: Id


class ScheduleCreateReq(Struct, rename="camel"):
    id: Id
    cron: Text
    promise_id: Text
    promise_timeout: Ms
    promise_param: Value = field(default_factory=Value)
    promise_tags: Tags = field(default_factory=dict)


class ScheduleDeleteReq(Struct):
    id: Id


class ScheduleSearchReq(Struct):
    tags: Tags | None = None
    limit: Limit | None = None
    cursor: Text | None = None
