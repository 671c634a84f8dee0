"""The resource API's JSON parser: DRF's, after the ``MAX_JSON_DEPTH`` check that ``POST /``
makes too (the standard library's decoder raises ``RecursionError``, a 500, near 10,000 levels).
"""

from __future__ import annotations

import codecs
import io
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from resonate_project.edges.json_depth import depth_refusal


class DepthLimitedJSONParser(JSONParser):
    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,
    ) -> Any:
        body = stream.read()
        encoding = get_encoding(parser_context or {})  # a 400 unless a text encoding
        if codecs.lookup(encoding).name != "utf-8":
            body_utf8 = body.decode(encoding, "replace").encode()
        else:
            body_utf8 = body
        if refusal := depth_refusal(body_utf8):
            raise ParseError(refusal)
        return super().parse(io.BytesIO(body), media_type, parser_context)
