"""Settings: the record a user writes (`config`), where its values come from (`sources`), the parts
each layer is handed (`parts`) and a night's stored settings (`night`)."""
