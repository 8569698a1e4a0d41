"""Cheap signals of what kind of text comes next: the user's request, and code fences.

How predictable the reply is depends on what it is: code and quoted material run long before a
draft goes wrong; free prose does not. Before the first token the only evidence is the request
itself, so ``guess_topic`` sorts it by a few words ("translate", "summarize", a programming
language, numbers with a question) into one of ``TOPICS``. It only picks which remembered
acceptance statistics to start from — the acceptance the controller then measures decides.
Inside a reply, entering or leaving a Markdown code fence is the other sure sign.
"""

from __future__ import annotations

import re

TOPICS = ("code", "math", "translation", "summary", "chat")

_SUMMARY = re.compile(r"\b(summari[sz]e|summary|tl;?dr)\b", re.I)
_TRANSLATE = re.compile(r"\btranslat(e|ion|ing)\b", re.I)
_CODE = re.compile(
    r"```|(?<![\w+#])(python|javascript|typescript|java|c\+\+|c#|rust|golang|sql|html|css|bash|"
    r"shell|regex|json|yaml|program|programming|function|script|code|algorithm|implement|"
    r"compile|debug|class|api|snippet|refactor)(?![\w+#])", re.I)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_MATH_WORDS = re.compile(r"\b(how many|how much|calculate|compute|solve|equation|total|percent|"
                         r"average|area|probability|sum|cost|price|per)\b|[$%=^]", re.I)
_HEAD = 300  # characters of the request where its instruction usually is


def guess_topic(request: str) -> str:
    """The topic a request most likely asks for (one of ``TOPICS``; "chat" when unsure)."""
    head = request.strip()[:_HEAD]
    if _SUMMARY.search(head):
        return "summary"
    if _TRANSLATE.search(head):
        return "translation"
    if _CODE.search(request):
        return "code"
    if len(_NUMBER.findall(request)) >= 2 and _MATH_WORDS.search(request):
        return "math"
    return "chat"


class FenceTracker:
    """Follows a streamed reply and says when it enters or leaves a ``` code fence."""

    def __init__(self) -> None:
        self.inside = False
        self._tail = ""  # the last characters seen, for a fence split across steps

    def reset(self) -> None:
        self.inside = False
        self._tail = ""

    def feed(self, text: str) -> bool:
        """Add the next piece of the reply; True if it crossed a fence (see ``inside``)."""
        if not text:
            return False
        window = self._tail + text
        start = 0
        crossed = False
        while (i := window.find("```", start)) >= 0:
            if i + 3 > len(self._tail):  # the fence ends in the new text: not counted before
                self.inside = not self.inside
                crossed = True
            start = i + 3
            while start < len(window) and window[start] == "`":
                start += 1  # a longer run of backticks is one fence
        self._tail = window[-3:]
        return crossed
