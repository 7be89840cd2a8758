"""The two Flower-free halves every algorithm is written as (server rule, client rule), their declared state and what
a round carries."""
