"""The experiment engine: a study is arguments → jobs → report → reproduce line (`study.Study`); jobs run on
the one runner (`runner.run_jobs`) with progress shown, and every report reads results folders the same way.
"""
