"""`--log-format json`: one JSON object per log line, carrying the job, task and worker ids it is about.

Ids come from the record's extras (`log.info(..., extra={"job_id": 7})`), else from the
`key=value` words corral's log lines already use (`task=12 attempt=0`), so one grep or one
query on `job_id` tells a job's whole story.
"""

from __future__ import annotations

import json
import logging
import re
import time

# The ids a line may carry: the name in the JSON, and the word that names it in a message.
ID_FIELDS = {"job_id": "job", "task_id": "task", "attempt": "attempt", "worker_id": "worker_id", "epoch": "epoch"}
_WORD = re.compile(r"\b(job|task|attempt|worker_id|epoch)=([\w.-]+)")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(), "logger": record.name, "message": message,
        }
        words = dict(_WORD.findall(message))
        for field, word in ID_FIELDS.items():
            value = getattr(record, field, None)
            if value is None:
                value = words.get(word)
            if value is not None:
                line[field] = int(value) if str(value).isdigit() and field != "worker_id" else value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure_logging(log_format: str) -> None:
    """Install the JSON handler on the root logger; "text" leaves the processes' own set-up alone."""
    if log_format != "json":
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
