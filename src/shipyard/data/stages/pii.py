"""PII redaction: e-mail addresses, phone numbers and IP addresses become placeholders.

The text column is replaced by its redacted form; `pii_count` says how many spans were replaced.
A document that keeps the patterns busy past `pii.timeout_s` (the e-mail pattern is quadratic in
a long run like `a.a.a.…`, as datatrove's is) goes to quarantine by name, in a worker process
that is killed and replaced (`shipyard.data.isolate`).
"""

import ipaddress
import re
from typing import ClassVar

from shipyard.data.batch import Batch, Quarantine, guarded_map, keep_rows
from shipyard.data.config import PipelineConfig
from shipyard.data.stages.base import Stage, register

EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[a-zA-Z]{2,}\b")
# Phone numbers: an optional +country code, then 7–15 digits in groups split by space, dot or dash.
PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){2,4}(?!\w)"
)
IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
# IPv6 candidates (two or more colons, hex digits), confirmed by `ipaddress` before redaction.
IPV6 = re.compile(
    r"(?<![\w:])(?=[0-9a-fA-F:]*[0-9a-fA-F])[0-9a-fA-F]*:[0-9a-fA-F:]*:[0-9a-fA-F:]*(?![\w:])"
)

PLACEHOLDERS = {"email": "<EMAIL>", "phone": "<PHONE>", "ip": "<IP>"}


def _valid_ip(match: re.Match[str]) -> bool:
    # "a::b" parses as IPv6 but in text is far more often code; real addresses have a long group.
    if ":" in match.group(0) and max(len(g) for g in match.group(0).split(":")) < 3:
        return False
    try:
        ipaddress.ip_address(match.group(0))
    except ValueError:
        return False
    return True


def redact(text: str, email: bool = True, phone: bool = True, ip: bool = True) -> tuple[str, int]:
    """`text` with PII replaced, and the number of replacements."""
    count = 0

    def sub(pattern: re.Pattern[str], placeholder: str, text: str, check: bool = False) -> str:
        nonlocal count

        def replace(m: re.Match[str]) -> str:
            nonlocal count
            if check and not _valid_ip(m):
                return m.group(0)
            count += 1
            return placeholder

        return pattern.sub(replace, text)

    if email:
        text = sub(EMAIL, PLACEHOLDERS["email"], text)
    if ip:  # before phones: a dotted quad would otherwise read as a phone number
        text = sub(IPV4, PLACEHOLDERS["ip"], text, check=True)
        text = sub(IPV6, PLACEHOLDERS["ip"], text, check=True)
    if phone:
        text = sub(PHONE, PLACEHOLDERS["phone"], text)
    return text, count


@register
class Pii(Stage):
    name: ClassVar[str] = "pii"
    version: ClassVar[str] = "1"
    section: ClassVar[str] = "pii"

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config.pii

    def process(self, batch: Batch, quarantine: Quarantine) -> Batch:
        c, texts = self.config, batch["text"]

        def one(i: int) -> tuple[str, int]:
            return redact(texts[i], c.email, c.phone, c.ip)

        kept, results = guarded_map(batch, self.name, quarantine, one, c.timeout_s)
        out = keep_rows(batch, kept)
        out["text"] = [text for text, _ in results]
        out["pii_count"] = [n for _, n in results]
        return out
