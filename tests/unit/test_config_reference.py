"""The configuration reference and the JSON Schema are the models' own: generated, and checked against them."""

from __future__ import annotations

import json
import tomllib

import jsonschema
import pytest
from pydantic import BaseModel

from lakepurge.core import config_reference
from lakepurge.core.config_reference import MEANINGS, REFERENCE, ROOT, SCHEMA, SECTIONS

pytestmark = pytest.mark.unit


def test_the_reference_and_the_schema_in_docs_are_what_the_models_generate() -> None:
    # After a change to lakepurge/core/config.py: python -m lakepurge.core.config_reference
    assert REFERENCE.read_text(encoding="utf-8") == config_reference.reference_markdown()
    assert SCHEMA.read_text(encoding="utf-8") == config_reference.json_schema()
    assert config_reference.main(["--check"]) == 0


def test_every_key_of_every_section_is_in_the_reference_with_a_meaning() -> None:
    reference = config_reference.reference_markdown()
    for heading, model in SECTIONS:
        for name, field in model.model_fields.items():
            meaning = config_reference.meaning_of(model, name)
            assert meaning, f"{heading} {name}: no comment in config.py and no entry in MEANINGS"
            assert f"| `{field.alias or name}` |" in reference
    for model, name in MEANINGS:  # an entry for a key that no longer exists is drift too
        assert name in model.model_fields, f"MEANINGS names {model.__name__}.{name}, which is not a key"
    documented = {model for _, model in SECTIONS}
    nested = {
        field.annotation
        for model in documented
        for field in model.model_fields.values()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }
    assert nested <= documented, "a section of the file is missing from SECTIONS"


def test_a_field_added_to_a_model_is_drift(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_reference, "reference_markdown", lambda: REFERENCE.read_text() + "| `new_key` |\n")
    assert config_reference.main(["--check"]) == 1


def test_the_example_configuration_is_valid_under_the_schema() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    example = tomllib.loads((ROOT / "examples" / "lakepurge.toml").read_text(encoding="utf-8"))
    jsonschema.validate(example, schema)
    with pytest.raises(jsonschema.ValidationError, match="max_dataset_fraction"):
        jsonschema.validate({**example, "purge": {"max_dataset_fraction": 2}}, schema)
