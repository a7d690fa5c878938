"""The harness: run the agent under a deadline, sample its process tree's CPU, kill what is left, and say
what happened (``python -m miniagent.lab.harness``)."""
