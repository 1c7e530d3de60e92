"""A pytest plugin for test_e2e_schedule.py: after collection, writes each selected item's node
id and lane (its xdist_group mark) to the JSON file named by $E2E_SCHEDULE_OUT."""

import json
import os


def pytest_collection_finish(session):
    lanes = [{"nodeid": item.nodeid,
              "lane": (mark.args[0] if (mark := item.get_closest_marker("xdist_group")) else None)}
             for item in session.items]
    with open(os.environ["E2E_SCHEDULE_OUT"], "w") as out:
        json.dump(lanes, out)
