"""An issue with an inventory's data: host, key, value, and what is allowed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DataIssue:
    host: str
    key: str
    value: Any
    allowed: str  # what the key accepts; empty when a hint says it better
    reason: str = ""  # why this value is refused, when "not allowed" is not obvious
    hint: str = ""  # what to do instead

    def __str__(self) -> str:
        parts = [self.reason, f"allowed {self.allowed}" if self.allowed else "", self.hint]
        return f"host {self.host}: {self.key} = {self.value!r} is invalid: " + "; ".join(p for p in parts if p)


class ProfileError(Exception):
    def __init__(self, issues: Sequence[DataIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))
