"""The search of `GET /v1/jobs`: its criteria, and how each query parameter reads. A value that
parses is not a value that fits: every name, time and metadata pair has a range, and anything
else is refused (errors.InvalidRequest naming the parameter), never passed to storage."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from jobgate import errors
from jobgate.domain import ranges
from jobgate.domain.bulk import MAX_METADATA_KEYS
from jobgate.domain.job import Job

MAX_NAME_CHARS = 200  # a model's or a provider's name
MAX_METADATA_KEY_CHARS = 64  # OpenAI's bounds on metadata (/v1/responses keeps them)
MAX_METADATA_VALUE_CHARS = 512
# RFC 3339's date-time: a full date and time with seconds, and an offset (Z or ±hh:mm).
RFC3339 = r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})"
UNIX_SECONDS = r"\d{1,12}(?:\.\d{1,9})?"
TIME_PATTERN = f"^(?:{UNIX_SECONDS}|{RFC3339})$"  # the syntax; the value must be a real time too
_RFC3339 = re.compile(f"^{RFC3339}$", re.ASCII)  # ASCII: \d is 0-9, no other script's digits
_UNIX_SECONDS = re.compile(f"^{UNIX_SECONDS}$", re.ASCII)
_METADATA = re.compile(r"^metadata\[(.*)\]$", re.DOTALL)
# The parameters that are not search criteria.
PAGE_PARAMS = frozenset({"status", "dead_lettered", "after", "limit"})
SEARCH_PARAMS = frozenset({"model", "provider", "created_after", "created_before"})
# The most of a tenant's jobs one search page walks (inside its created range), matching or
# not: the bound of a page's cost, whatever share of the jobs match. A page that reaches it
# first is partial, and the next continues where it stopped.
WALK_ROWS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class JobSearch:
    """Criteria a listed job must all meet; None means any."""

    provider: str | None = None
    model: str | None = None
    created_after: datetime | None = None  # inclusive
    created_before: datetime | None = None  # exclusive
    metadata: Mapping[str, str] | None = None  # top-level members holding these strings

    @property
    def is_empty(self) -> bool:
        """No criterion at all: the plain list."""
        return self == JobSearch()


@dataclasses.dataclass(frozen=True, slots=True)
class Page:
    """A page of `GET /v1/jobs`, newest first: its jobs, whether more may follow, and the
    cursor the next page passes as `after` (`last_id`): the last job the page walked, which on
    a partial page (a search's walk that reached WALK_ROWS first) is a job not shown."""

    jobs: list[Job]
    has_more: bool
    last_id: str | None


def page(found: list[Job], limit: int, walked_to: str | None = None) -> Page:
    """The page of `found`, read with a look-ahead (up to `limit` + 1 jobs: one past the
    page says more follow), and of `walked_to`, where a search's walk stopped short of
    filling the page (partial: more may follow after that job, even with no job shown)."""
    if len(found) > limit:
        return Page(found[:limit], True, found[limit - 1].id)
    if walked_to is not None:
        return Page(found, True, walked_to)
    return Page(found, False, found[-1].id if found else None)


def read(params: Iterable[tuple[str, str]]) -> JobSearch:
    """The search of a query string's (name, value) pairs. The page's own parameters
    (PAGE_PARAMS) are left to the route; any other name but the criteria and
    `metadata[KEY]` is refused, so that a misspelt filter never lists every job."""
    names: dict[str, str] = {}
    metadata: dict[str, str] = {}
    for name, value in params:
        if name in PAGE_PARAMS:
            continue
        found = _METADATA.match(name)
        if found is not None:
            _add_pair(metadata, found.group(1), value)
        elif name in SEARCH_PARAMS:
            if name in names:
                raise errors.InvalidRequest(f"{name} is given twice", param=name)
            names[name] = value
        elif not name:
            raise errors.InvalidRequest("a query parameter without a name")
        else:
            hint = " (metadata is searched as metadata[KEY]=VALUE)" if "metadata" in name else ""
            raise errors.InvalidRequest(f"unknown parameter {name[:80]!r}{hint}", param=name[:80])
    search = JobSearch(
        provider=_name(names, "provider"),
        model=_name(names, "model"),
        created_after=_moment(names, "created_after"),
        created_before=_moment(names, "created_before"),
        metadata=metadata or None,
    )
    after, before = search.created_after, search.created_before
    if after is not None and before is not None and after > before:
        raise errors.InvalidRequest(
            "created_after is later than created_before", param="created_after"
        )
    return search


def _add_pair(metadata: dict[str, str], key: str, value: str) -> None:
    param = f"metadata[{key[:MAX_METADATA_KEY_CHARS]}]"
    if not key:
        raise errors.InvalidRequest("metadata[KEY] needs a key", param="metadata")
    if len(key) > MAX_METADATA_KEY_CHARS:
        message = f"a metadata key is at most {MAX_METADATA_KEY_CHARS} characters"
        raise errors.InvalidRequest(message, param="metadata")
    if len(value) > MAX_METADATA_VALUE_CHARS:
        message = f"a metadata value is at most {MAX_METADATA_VALUE_CHARS} characters"
        raise errors.InvalidRequest(message, param=param)
    if "\x00" in key or "\x00" in value:
        raise errors.InvalidRequest("metadata holds no NUL character", param="metadata")
    if key in metadata:
        raise errors.InvalidRequest(f"{param} is given twice", param=param)
    if len(metadata) == MAX_METADATA_KEYS:
        message = f"at most {MAX_METADATA_KEYS} metadata pairs"
        raise errors.InvalidRequest(message, param="metadata")
    metadata[key] = value


def _name(names: Mapping[str, str], param: str) -> str | None:
    value = names.get(param)
    if value is None:
        return None
    if not value or len(value) > MAX_NAME_CHARS or "\x00" in value:
        message = f"{param} is a name of 1 to {MAX_NAME_CHARS} characters"
        raise errors.InvalidRequest(message, param=param)
    return value


def _moment(names: Mapping[str, str], param: str) -> datetime | None:
    """A time from Unix seconds (`1796133600`, fractions allowed) or an RFC 3339 date-time
    with its offset (`2026-12-01T14:00:00Z`); nothing else (no date alone, no local time)."""
    value = names.get(param)
    if value is None:
        return None
    refused = errors.InvalidRequest(
        f"{param} is Unix seconds or an RFC 3339 date-time such as 2026-12-01T14:00:00Z",
        param=param,
    )
    try:
        if _UNIX_SECONDS.match(value):
            seconds = float(value)
            if seconds > ranges.RUN_AT_MAX:
                raise refused
            return datetime.fromtimestamp(seconds, UTC)
        if _RFC3339.match(value):
            moment = datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
            return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise refused from None
    raise refused
