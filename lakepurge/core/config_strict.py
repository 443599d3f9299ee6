"""The base of every configuration table: unknown keys are errors (a typo never silently means a default)."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
