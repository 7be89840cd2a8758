"""Privacy for every algorithm (docs/privacy.md): client-level differential privacy of what a client uploads
(`fedsuite.privacy.release` on the client, fedsuite/server/privacy.py on the server), its settings and one-line
refusals (`fedsuite.privacy.settings`), and the privacy budget computed by a maintained accounting library
(`fedsuite.privacy.accountant`)."""
