"""Client halves of the algorithms, one module each, on the shared `fedsuite.rules.client_rule.ClientRule`."""
