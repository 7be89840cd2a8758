"""Server halves of the algorithms, one module each, on the shared `fedsuite.rules.server_rule.FedStrategy`."""
