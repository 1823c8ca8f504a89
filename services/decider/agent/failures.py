"""How a model call can fail, classified: the run counts each kind and falls back to the policy when it must."""

from __future__ import annotations


class ModelFailure(Exception):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail
