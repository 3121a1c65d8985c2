"""Ray Serve's asynchronous inference with a topic as the broker: a @task_consumer
deployment takes tasks from a topic; no Redis, RabbitMQ or Celery process.

Run: pip install -e ".[serve]" && python examples/serve_tasks.py
(RAY_ADDRESS=... to use a running cluster)
"""

import time
import uuid

from ray import serve
from ray.serve.schema import TaskProcessorConfig
from ray.serve.task_consumer import instantiate_adapter_from_config, task_consumer, task_handler

import raytopic as rt
from raytopic.serve import TopicAdapterConfig, TopicTaskAdapter

queue = f"example-tasks-{uuid.uuid4().hex[:6]}"
config = TaskProcessorConfig(
    queue_name=queue,  # a topic of this name (made if missing)
    adapter=TopicTaskAdapter,
    adapter_config=TopicAdapterConfig(channels=2, retry_backoff_s=0.1),
    max_retries=1,
    failed_task_queue_name=f"{queue}-failed",  # topics too
    unprocessable_task_queue_name=f"{queue}-unprocessable",
)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
@task_consumer(task_processor_config=config)
class Scorer:
    @task_handler(name="score")
    def score(self, text: str) -> int:
        if not text:
            raise ValueError("nothing to score")
        return len(text)


serve.start(proxy_location="Disabled")  # connects to Ray (RAY_ADDRESS, else a local one)
serve.run(Scorer.bind(), name=queue, route_prefix=None)
try:
    tasks = instantiate_adapter_from_config(config)  # the producer's side
    texts = ["a", "bb", "", "dddd"]
    ids = [tasks.enqueue_task_sync("score", args=[text], key="user-7").id for text in texts]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(
        tasks.get_task_status_sync(i).status not in ("SUCCESS", "FAILURE") for i in ids
    ):
        time.sleep(0.1)
    for task_id in ids:
        result = tasks.get_task_status_sync(task_id)
        print(result.status, result.result)
    with rt.get_topic(f"{queue}-failed").subscriber(start="earliest", complete_on_empty=True) as s:
        failed = [element.value for element in s]
    print("failed-task queue:", [(entry["args"], entry["error"]) for entry in failed])
    statuses = {tasks.get_task_status_sync(i).status for i in ids}
    if statuses <= {"SUCCESS", "FAILURE"} and len(failed) == 1:
        print("every task succeeded or is in the failed-task queue")
finally:
    serve.delete(queue)
    tasks.destroy()  # the queue and all it made: its topics, task log and task board
