"""The evaluation library behind `graft eval`: splits, systems, metrics, TREC run files, the runner
and the survey suite (the experiments that measure design choices live in experiments/)."""
