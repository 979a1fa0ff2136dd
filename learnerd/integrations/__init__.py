"""Ready-made integrations that log what people run to a running ``learnerd run`` (``POST /v1/blocks``):
:mod:`.ipython` for IPython and Jupyter. The shell hook and the bare HTTP call are in docs/integrations.md."""
