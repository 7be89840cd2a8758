"""Client halves of the algorithms, one module each, on the shared `fedsuite.client_rule.ClientRule`."""
