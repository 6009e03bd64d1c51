"""Views that enqueue a job, and look up its result later."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from quasar_redis import JobHandle, Status

from .tasks import add, app


def enqueue_sum(request: HttpRequest) -> JsonResponse:
    handle = add.enqueue(int(request.GET["a"]), int(request.GET["b"]))
    return JsonResponse({"job": handle.id}, status=202)


def sum_result(request: HttpRequest, job_id: str) -> JsonResponse:
    info = JobHandle(app, job_id).info()
    if info is None:
        return JsonResponse({"error": "no such job"}, status=404)
    if info.status is not Status.COMPLETED:
        return JsonResponse({"status": info.status.value}, status=202)
    return JsonResponse({"status": info.status.value, "sum": info.job.result})
