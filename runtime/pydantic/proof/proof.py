import sys, time, json
t0 = time.perf_counter()
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
import pydantic, pydantic_core
t1 = time.perf_counter()
print("python", sys.version.split()[0], "platform", sys.platform)
print("pydantic", pydantic.VERSION, "pydantic-core", pydantic_core.__version__,
      "core module:", pydantic_core._pydantic_core.__spec__.origin)
print(f"import pydantic: {(t1 - t0) * 1000:.1f} ms")

class Address(BaseModel):
    street: str
    city: str
    zip_code: str = Field(pattern=r"^\d{5}$")

class Person(BaseModel):
    name: str = Field(min_length=1)
    age: int = Field(ge=0, le=150)
    email: str | None = None
    tags: list[str] = []
    addresses: list[Address]

good = {"name": "Ada", "age": "36", "tags": ["x"],
        "addresses": [{"street": "1 Main St", "city": "Springfield", "zip_code": "12345"}]}
p = Person.model_validate(good)
print("valid:", repr(p))
print("model_dump:", p.model_dump())
print("model_dump_json:", p.model_dump_json())
bad = {"name": "", "age": -3, "addresses": [{"street": "x", "zip_code": "12"}]}
try:
    Person.model_validate(bad)
    print("UNEXPECTED: invalid input accepted")
    sys.exit(1)
except ValidationError as e:
    print("ValidationError (expected):")
    print(e)
    assert e.error_count() == 4, e.error_count()
ta = TypeAdapter(list[int])
print("TypeAdapter:", ta.validate_json("[1, \"2\", 3]"))
schema = Person.model_json_schema()
print("model_json_schema:", json.dumps(schema, sort_keys=True)[:400], "...")
assert schema["properties"]["addresses"]["items"]["$ref"] == "#/$defs/Address"
print(f"validation part: {(time.perf_counter() - t1) * 1000:.1f} ms")
print("PROOF OK")
