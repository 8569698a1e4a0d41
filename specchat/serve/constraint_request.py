"""A request's constrained output: ``response_format`` ``{"type": "json_object"}`` (any JSON
object; a ``schema`` beside it, as llama-server takes it, constrains it further) or ``{"type":
"json_schema", "json_schema": {"name", "schema", "strict"}}``, or llama-server's ``grammar``
(Lark or GBNF text), compiled here by llguidance (``engine/decode/grammar.py``): a schema or
grammar that does not compile is a 400 naming the field, before anything is queued."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from specchat.engine.decode.grammar import GrammarError, compile_grammar
from specchat.serve.api_errors import bad_request
from specchat.serve.fields import shown, unicode_text, wrong_type


def _compiled(kind: Any, text: str | None, param: str, code: str) -> str:
    try:
        return compile_grammar(kind, text)
    except GrammarError as e:
        raise bad_request(str(e), param, code) from None


def _schema_text(schema: Any, param: str) -> str:
    if not isinstance(schema, dict):
        raise wrong_type(param, "a JSON schema (an object)", schema)
    return json.dumps(schema)


def constraint(doc: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The reply's grammar (llguidance's) from ``response_format`` or ``grammar``, and the field
    it came from; (None, None) for free text."""
    fmt, grammar = doc.get("response_format"), doc.get("grammar")
    out: tuple[str | None, str | None] = (None, None)
    if fmt is not None:
        if not isinstance(fmt, dict):
            raise wrong_type("response_format", "an object", fmt)
        kind = fmt.get("type", "text")
        if kind == "json_object":
            schema = fmt.get("schema")
            out = (_compiled("json_object", None, "response_format", "invalid_value")
                   if schema is None else
                   _compiled("json_schema", _schema_text(schema, "response_format.schema"),
                             "response_format.schema", "invalid_json_schema"),
                   "response_format")
        elif kind == "json_schema":
            spec = fmt.get("json_schema")
            if spec is None:
                raise bad_request("'response_format.json_schema' is required with type "
                                  "'json_schema'", "response_format.json_schema",
                                  "missing_required_parameter")
            if not isinstance(spec, dict):
                raise wrong_type("response_format.json_schema", "an object", spec)
            if spec.get("strict") is not None and not isinstance(spec.get("strict"), bool):
                raise wrong_type("response_format.json_schema.strict", "true or false",
                                 spec.get("strict"))
            # Strict or not, the schema is enforced: every token is masked to it.
            where = "response_format.json_schema.schema"
            schema = spec.get("schema")
            text = _schema_text({} if schema is None else schema, where)
            out = (_compiled("json_schema", text, where, "invalid_json_schema"), "response_format")
        elif kind != "text":
            raise bad_request("'response_format.type' must be 'text', 'json_object' or "
                              f"'json_schema', not {shown(kind)!r}", "response_format.type")
    if grammar is not None:
        if not isinstance(grammar, str):
            raise wrong_type("grammar", "a string (a Lark or GBNF grammar)", grammar)
        if out[0] is not None:
            raise bad_request("give 'grammar' or a JSON 'response_format', not both", "grammar")
        out = (_compiled("grammar", unicode_text(grammar, "grammar"), "grammar",
                         "invalid_grammar"), "grammar")
    return out
