"""A configuration mistake in words (lakepurge.core.config.parse_settings): the key's path as the file writes it,
what is wrong and, where it helps, what to write instead, without pydantic's jargon."""

from __future__ import annotations

import difflib
from typing import get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The models a field can hold, through Optional, unions, tuples and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _fields(models: list[type[BaseModel]]) -> dict[str, FieldInfo]:
    """The keys of these tables as the file writes them (a field's alias, else its name)."""
    return {info.alias or name: info for model in models for name, info in model.model_fields.items()}


def _walk(root: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[str, list[type[BaseModel]], FieldInfo | None]:
    """The key's path as written in the file (``datasets[1].format``), the models of the table holding its last
    key, and that key's field (None for an unknown key). Pydantic's own steps (validator names, the tag of a
    ``kind`` union) are left out."""
    top: list[type[BaseModel]] = [root]
    path, models, parents, field = "", top, top, None
    keyed = False  # the last key was a table of named tables ([catalogs.NAME]): this part is a NAME
    for i, part in enumerate(loc):
        if isinstance(part, int):
            path += f"[{part}]"
            continue
        fields = _fields(models)
        if keyed:
            path += f".{part}"
            keyed = False
        elif part in fields:
            parents, field = models, fields[part]
            models = _models_in(field.annotation)
            path += f".{part}" if path else part
            keyed = getattr(field.annotation, "__origin__", None) is dict
        elif i == len(loc) - 1:
            parents, field = models, None
            path += f".{part}" if path else part
        else:  # the tag of a discriminated union (launcher kind) or a validator's name
            tagged = [
                m for m in models if "kind" in m.model_fields and part in get_args(m.model_fields["kind"].annotation)
            ]
            models = tagged or models
    return path or "(top level)", parents, field


_FORMS = {
    "sender": "an email address",
    "approvers": "an email address",
    "execution_role_arn": "an IAM role ARN (arn:aws:iam::123456789012:role/NAME)",
    "table": "a table name (letters, digits, '_', optionally schema.table)",
    "column": "a column name (letters, digits, '_')",
    "catalog_table": "database.table (the Glue table the dataset was imported from)",
    "DatasetConfig.table": "namespace.table (the Iceberg table as its catalog names it)",
}
_PLAIN = {
    "string_type": "must be a string (in quotes)",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_too_short": "must not be empty",
}
_BOUNDS = {"greater_than": "greater than", "greater_than_equal": "at least", "less_than": "less than"}
_BOUNDS["less_than_equal"] = "at most"


def plain_error(root: type[BaseModel], err: ErrorDetails) -> str:
    """One configuration mistake in words: what is wrong and, where it helps, what to write instead. No pydantic
    jargon ("valid tuple", "Input should be"); an unknown key close to a known one gets "did you mean"."""
    loc = tuple(err["loc"])
    path, parents, field = _walk(root, loc)
    key = next((part for part in reversed(loc) if isinstance(part, str) and part in _fields(parents)), "")
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    table = field is not None and bool(_models_in(field.annotation))
    if kind in _PLAIN:
        what = _PLAIN[kind]
    elif kind in _BOUNDS:
        what = f"must be {_BOUNDS[kind]} {next(iter(ctx.values()), '')}"
    elif kind == "extra_forbidden":
        known = sorted(_fields(parents))
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        what = f"unknown key, did you mean `{close[0]}`?" if close else f"unknown key (known here: {', '.join(known)})"
    elif kind == "missing":
        what = f"required section missing: add the [{path}] table" if table else "required key missing"
    elif kind == "literal_error":
        what = f"must be {ctx.get('expected', 'one of the documented values')}, not {value!r}"
    elif kind in ("union_tag_invalid", "union_tag_not_found"):
        what = f"kind must be {str(ctx.get('expected_tags', 'a known kind')).replace(', ', ' or ')}"
    elif kind in ("tuple_type", "list_type"):
        if table:
            what = f"must be a list of tables: write each one under its own [[{path}]] header"
        elif isinstance(value, str):
            what = f'must be a list, e.g. {key or path} = ["{value}"]'
        else:
            what = 'must be a list, e.g. ["a", "b"]'
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        what = f"must be a table: a [{path}] header with its keys below it, or {{ key = value, ... }}"
    elif kind == "too_short":
        what = f"needs at least {ctx.get('min_length', 1)} item(s)"
    elif kind == "string_pattern_mismatch":
        form = _FORMS.get(key, f"of the form {ctx.get('pattern', '')}")
        what = "must be " + _FORMS.get(f"{parents[0].__name__}.{key}", form)
    else:  # the validators' own messages, already in words
        what = err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        what = what.replace("Input should be", "must be")
    return what if path == "(top level)" else f"{path}: {what}"
