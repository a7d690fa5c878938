"""A learner's own files: where they live, their progress (``progress.json``) and their notebook of predictions."""
