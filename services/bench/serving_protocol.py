"""What an OpenAI-compatible server may answer the serving sweep, checked before anything is read from it: the
streamed completion chunks and the model list. A rented host's server is a stranger's program, so every field
is typed and bounded here, and an answer that does not fit is a `MalformedAnswer` naming what was wrong.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, JsonValue, StrictInt, StrictStr, ValidationError

# A real chunk is a few hundred bytes; 64 KiB leaves room for hundreds of tokens per chunk and stops a server
# that streams one endless line (the audit sent 32 MB without a newline and the client buffered all of it).
SSE_LINE_MAX_BYTES = 64 * 1024
# vLLM lists a base model and its LoRA adapters in a few KB; 1 MiB is ample and bounds what one GET costs.
MODEL_LIST_MAX_BYTES = 1024 * 1024
# The length ServingWorkload.model allows; a served model name that is a local path stays well under it.
MODEL_ID_MAX_CHARS = 256
STREAM_ERROR_MAX_CHARS = 200


class MalformedAnswer(Exception):
    """The server's answer broke the protocol; it fails the one request (or the model discovery) it came in."""


class _Strict(BaseModel):
    # Strict: a count of "1000000" (a string) or 1e400 is not a count; unknown fields are the server's business.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class ChunkDelta(_Strict):
    content: StrictStr | None = None
    reasoning_content: StrictStr | None = None  # reasoning models stream their thinking here first


class ChunkChoice(_Strict):
    delta: ChunkDelta | None = None  # /v1/chat/completions
    text: StrictStr | None = None  # /v1/completions


class ChunkUsage(_Strict):
    completion_tokens: Annotated[StrictInt, Field(ge=0)] | None = None


class StreamChunk(_Strict):
    """One `data:` payload of the stream (the last, with `stream_options.include_usage`, carries the usage)."""

    model: StrictStr | None = None
    choices: list[ChunkChoice] | None = None
    usage: ChunkUsage | None = None
    error: JsonValue = None  # vLLM reports an error met mid-stream as a chunk of its own

    def text(self) -> str:
        """The generated text in this chunk."""
        text = ""
        for choice in self.choices or []:
            delta = choice.delta or ChunkDelta()
            text += (delta.content or "") + (delta.reasoning_content or "") + (choice.text or "")
        return text

    def error_text(self) -> str | None:
        return None if self.error is None else str(self.error)[:STREAM_ERROR_MAX_CHARS]


class ListedModel(_Strict):
    id: Annotated[StrictStr, Field(min_length=1, max_length=MODEL_ID_MAX_CHARS)]


class ModelList(_Strict):
    """`GET /v1/models`."""

    data: list[ListedModel]


def first_problem(error: ValidationError) -> str:
    """Where and what, without the server's input (which may be megabytes, or written to mislead a reader)."""
    problem = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in problem["loc"]) or "the answer"
    return f"{where}: {problem['msg']}"


def parse_chunk(payload: str) -> StreamChunk:
    try:
        return StreamChunk.model_validate_json(payload)
    except ValidationError as error:
        raise MalformedAnswer(f"malformed stream chunk: {first_problem(error)}") from None


def parse_model_list(body: bytes) -> ModelList:
    try:
        return ModelList.model_validate_json(body)
    except ValidationError as error:
        raise MalformedAnswer(f"malformed model list: {first_problem(error)}") from None
