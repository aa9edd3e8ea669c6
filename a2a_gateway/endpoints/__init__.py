"""The endpoint stage: a row (from the store or the endpoints file) → its handler, card and
card signature, and how its backend has been answering."""
