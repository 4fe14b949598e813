"""A generate-then-score loop split in two processes: one generates every rollout, another scores them."""

TASKS = [{"task_id": "add", "answer": "4"}, {"task_id": "mul", "answer": "6"}]


def generate(task, repeat):
    return {"task_id": task["task_id"], "repeat": repeat, "completion": task["answer"] if repeat % 2 == 0 else "0"}


def score(completion, task_id, repeat):
    answer = {task["task_id"]: task["answer"] for task in TASKS}[task_id]
    return 1.0 if completion == answer else 0.0
