"""The ids the API takes, in a path or as a list's `after` cursor: one validator per kind of
object, used by every route that takes one. An id is what jobgate mints (a prefix, `_`, then
letters and digits), so anything else (a NUL, which PostgreSQL's text cannot hold, a space, a
non-ASCII letter, an over-long value) answers a 400 problem before any storage sees it. A
well-formed id of no object answers 404, as another tenant's does."""

from __future__ import annotations

from typing import Annotated

import pydantic

from jobgate.domain import ranges

# The shape every minted id has; each kind below names its object in /openapi.json.
_ID = pydantic.StringConstraints(
    min_length=1, max_length=ranges.MAX_CURSOR_CHARS, pattern=ranges.ID_PATTERN
)

JobId = Annotated[str, _ID, pydantic.Field(description="A job id (`job_…`, `resp_…`)")]
ResponseId = Annotated[str, _ID, pydantic.Field(description="A response id (`resp_…`)")]
FileId = Annotated[str, _ID, pydantic.Field(description="A file id (`file_…`)")]
BatchId = Annotated[str, _ID, pydantic.Field(description="A batch id (`batch_…`)")]
ScheduleId = Annotated[str, _ID, pydantic.Field(description="A schedule id (`sched_…`)")]
EndpointId = Annotated[str, _ID, pydantic.Field(description="A webhook endpoint id (`ep_…`)")]
ConversationId = Annotated[str, _ID, pydantic.Field(description="A conversation id (`conv_…`)")]
ItemId = Annotated[str, _ID, pydantic.Field(description="A conversation item id (`msg_…`)")]
PauseId = Annotated[str, _ID, pydantic.Field(description="A pause id (`pause_…`)")]

# A file's purpose as a list filter: a lower-case word (`batch`, `batch_output`), nothing else.
FilePurpose = Annotated[
    str,
    pydantic.StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z_]+$"),
    pydantic.Field(description="Only files of this purpose (`batch`, `batch_output`)"),
]
