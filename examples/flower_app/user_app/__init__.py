"""A user's Flower app (its own model, data and apps) that trains with fedsuite's algorithms via fedsuite.app."""
