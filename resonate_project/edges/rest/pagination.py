"""Cursor pagination ordered by id (``?limit=&cursor=``), answering ``{next, previous, results}``.

``limit`` defaults to ``SEARCH_LIMIT_DEFAULT`` and must be in ``1..SEARCH_LIMIT_MAX``, as for the
protocol's searches; a bad ``limit`` or ``cursor`` is a 400 naming it. As there, a page also stops
early where its records would pass ``MAX_SEARCH_RESPONSE_BYTES`` (one record always comes back),
and its link continues after the cut.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from resonate_project.core.conf import resonate_settings
from resonate_project.engine.search import RESPONSE_RESERVE, Record, fit

# Bytes of one next/previous link beyond the request's own URL: a cursor holding an id of up to
# 1024 characters, percent-encoded and base64-encoded.
LINK_RESERVE = 16 * 1024


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

    def fit(self, record: Callable[[Any], Record]) -> list[Record]:
        """The records of the page just read, cut where they would pass the response cap. The
        rows kept are those nearest the cursor; the link that continues past the cut (next, or
        previous when paging backwards) is pointed at the first row left out."""
        reserve = RESPONSE_RESERVE + 2 * (len(self.base_url) + LINK_RESERVE)
        budget = resonate_settings().MAX_SEARCH_RESPONSE_BYTES - reserve
        backwards = self.cursor is not None and self.cursor.reverse
        page: list[Any] = self.page  # type: ignore[has-type]  # set by paginate_queryset
        rows = page[::-1] if backwards else page
        kept, records, cut = fit(rows, record, budget)
        if cut:
            following = self._get_position_from_instance(rows[len(kept)], self.ordering)
            if backwards:
                self.has_previous, self.previous_position = True, following
            else:
                self.has_next, self.next_position = True, following
        if backwards:
            kept.reverse()
            records.reverse()
        self.page = kept
        return records

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
