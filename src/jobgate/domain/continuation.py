"""The rules of a response that continues earlier turns (`previous_response_id` or
`conversation` on a create), and the errors OpenAI answers when it cannot.

- One of the two at most: both together are refused.
- A previous response continues only if it is the caller's tenant's, finished (completed or
  incomplete), stored (`store` not false), and neither it nor any response before it in its
  chain was deleted or purged by retention; otherwise OpenAI's `previous_response_not_found`,
  the same answer for each (another tenant's response is indistinguishable from none).
- A conversation continues only if it is the caller's tenant's and not deleted.
"""

from __future__ import annotations

from typing import Any

from jobgate import errors
from jobgate.wire import response_items
from jobgate.wire.responses_objects import CONVERSATION

PREVIOUS = "previous_response_id"


def check(payload: dict[str, Any]) -> None:
    """Refuse a create that names both a previous response and a conversation, or that sends
    jobgate's own context member."""
    if payload.get(PREVIOUS) is not None and payload.get(CONVERSATION) is not None:
        raise errors.InvalidRequest(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param=CONVERSATION,
            code="mutually_exclusive_parameters",
        )
    if response_items.CONTEXT in payload:
        raise errors.InvalidRequest(
            f"{response_items.CONTEXT}: jobgate's own member; send earlier turns with "
            "previous_response_id or conversation",
            param=response_items.CONTEXT,
            code="unknown_parameter",
        )


def previous_not_found(response_id: str) -> errors.InvalidRequest:
    """OpenAI's answer for a previous response that cannot be continued from."""
    return errors.InvalidRequest(
        f"Previous response with id '{response_id}' not found.",
        param=PREVIOUS,
        code="previous_response_not_found",
    )


def previous_not_finished(response_id: str) -> errors.InvalidRequest:
    """A previous response still running (or that ended without output) has no turn to
    continue from yet."""
    return errors.InvalidRequest(
        f"Previous response with id '{response_id}' has not completed; continue from it once "
        "it has.",
        param=PREVIOUS,
        code="previous_response_not_completed",
    )


def conversation_not_found(conversation: str) -> errors.NotFound:
    return errors.NotFound("conversation", conversation)


def continuable(request: dict[str, Any]) -> bool:
    """Whether a response created with `request` may be continued (it was stored)."""
    return request.get("store") is not False
