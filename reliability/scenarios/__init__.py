"""The harness's scenarios, one module each (see ``reliability/common.py``)."""
