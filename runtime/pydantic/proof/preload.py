import pydantic, pydantic_core, json, time
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
