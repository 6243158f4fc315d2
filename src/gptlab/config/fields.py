"""`setting(...)` and its readers, as config's schemas use them. Defined at the base (gptlab.fields), so that the
model's own schema, GPTConfig (plain PyTorch, below config/), declares its checks the same way."""

from gptlab.fields import check_of, help_of, schema_fields, setting  # noqa: F401
