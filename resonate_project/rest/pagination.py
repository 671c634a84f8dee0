"""Cursor pagination ordered by id (``?limit=&cursor=``), answering ``{next, previous, results}``.

``limit`` defaults to ``SEARCH_LIMIT_DEFAULT`` and must be in ``1..SEARCH_LIMIT_MAX``, as for the
protocol's searches; a bad ``limit`` or ``cursor`` is a 400 naming it.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from promises.conf import resonate_settings


class IdCursorPagination(CursorPagination):
    ordering = "pk"
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        conf = resonate_settings()
        raw = request.query_params.get(self.page_size_query_param, "")
        if raw == "":
            return conf.SEARCH_LIMIT_DEFAULT
        try:
            limit = int(raw)
        except ValueError:
            limit = 0
        if not 1 <= limit <= conf.SEARCH_LIMIT_MAX:
            raise ValidationError(
                {"limit": f"limit must be an integer in 1..{conf.SEARCH_LIMIT_MAX}"}
            )
        return limit

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": "invalid cursor"}) from None
        # A forged position with NUL in it would reach PostgreSQL, which refuses NUL in text.
        if cursor is not None and cursor.position and "\0" in cursor.position:
            raise ValidationError({"cursor": "invalid cursor"})
        return cursor

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        conf = resonate_settings()
        params = super().get_schema_operation_parameters(view)
        for param in params:
            if param["name"] == self.page_size_query_param:
                param["schema"].update(minimum=1, maximum=conf.SEARCH_LIMIT_MAX)
                param["description"] = f"page size (default {conf.SEARCH_LIMIT_DEFAULT})"
        return params
