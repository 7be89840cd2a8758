"""A tuning's parts: what is searched (space), one trial and the searches (trials), what it writes (outputs).
The command is simulation/tune.py."""
