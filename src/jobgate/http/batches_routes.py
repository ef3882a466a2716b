from fastapi import APIRouter

router = APIRouter(prefix="/v1", tags=["batches"])
