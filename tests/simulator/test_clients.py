"""Other clients, unmodified and used as their docs show, against the simulator.

The openai SDK (``create``, ``stream=True``, ``.parse`` with a plain Pydantic model, function
tools with ``tool_choice`` auto / required / named and a round trip, web search), instructor
(``Mode.JSON_SCHEMA``, ``Mode.JSON``, ``Mode.MD_JSON``, ``Mode.TOOLS``), pydantic-ai's Moonshot
provider with a structured ``output_type`` (tool output and ``PromptedOutput``) and
langchain-openai's ``with_structured_output(method="json_mode")`` with the prompts its docs
show. The simulator runs as ``kimi-extract simulate`` runs it: default options, a real HTTP port
on 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import instructor
import jsonschema
import openai
import pytest
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent, PromptedOutput, ToolOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.moonshotai import MoonshotAIProvider

from kimi_extract.simulator import Simulator

MODEL = "kimi-k3.1-pro"
REVIEW_TEXT = "Review: the blender is loud but crushes ice well. Four stars from me."


class Review(BaseModel):
    """A product review, as a plain Pydantic model: titles, defaults, optional fields, bounds, a
    pattern."""

    title: str = Field(title="Headline", description="A short headline for the review")
    rating: int = Field(default=3, ge=1, le=5, description="Stars, 1 to 5")
    pros: list[str] = Field(default_factory=list)
    verdict: str | None = None
    sku: str = Field(default="AAA-0000", pattern=r"^[A-Z]{3}-\d{4}$")


class Person(BaseModel):
    """A recursive model: pydantic-ai's schema for it refers to its own root (``"$ref": "#"``)."""

    name: str
    boss: Person | None = None


#: The API reference's own function-calling example
#: (docs/reference/kimi-chat-completions-reference.md, ``function_calling``).
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a specified city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as server:  # what `kimi-extract simulate` serves (there: history_limit=0)
        yield server


@pytest.fixture
def client(sim: Simulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=sim.openai_base_url, api_key=sim.api_key, max_retries=0) as c:
        yield c


def last_body(sim: Simulator) -> dict[str, Any]:
    body = sim.history[-1].body
    assert body is not None
    return body


# -- the openai SDK ------------------------------------------------------------------------------


def test_openai_create_and_stream_with_usage(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "Say hello to the river town."}]
    completion = client.chat.completions.create(model=MODEL, messages=messages)
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop" and message.content
    assert completion.usage is not None and completion.usage.completion_tokens > 0

    stream = client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, stream_options={"include_usage": True}
    )
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert (text, finish) == (message.content, "stop")
    assert usage is not None and usage.total_tokens == completion.usage.total_tokens


def test_openai_parse_a_plain_pydantic_model(sim: Simulator, client: openai.OpenAI) -> None:
    for attempt in range(3):
        completion = client.chat.completions.parse(
            model=MODEL,
            messages=[{"role": "user", "content": f"{REVIEW_TEXT} ({attempt})"}],
            response_format=Review,
        )
        parsed = completion.choices[0].message.parsed
        assert isinstance(parsed, Review) and 1 <= parsed.rating <= 5
    sent = last_body(sim)["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["title"]["title"] == "Headline"  # the SDK's schema, as it is
    assert sent["properties"]["rating"]["default"] == 3


def test_openai_function_tools_auto_round_trip(sim: Simulator, client: openai.OpenAI) -> None:
    """The reference's example: the user names no function, tool_choice auto -> get_weather;
    the tool result goes back as the openai docs show, and the model answers in text."""
    messages: list[Any] = [{"role": "user", "content": "Check today's weather in Beijing."}]
    tools: Any = [WEATHER_TOOL]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=tools, tool_choice="auto"
    )
    assert first.choices[0].finish_reason == "tool_calls"
    message = first.choices[0].message
    assert message.tool_calls
    call = message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])

    messages.append(message)  # the SDK's message object, as the openai docs append it
    messages.append(
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"forecast": "sunny"})}
    )
    final = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls
    assert [m["role"] for m in last_body(sim)["messages"]] == ["user", "assistant", "tool"]


@pytest.mark.parametrize(
    ("text", "tool_choice", "expected"),
    [
        ("What time is it in Oslo? Use get_time.", "auto", "get_time"),  # the named one
        ("Tell me about Oslo.", "auto", "get_weather"),  # none named: the first
        ("Tell me about Oslo.", "required", "get_weather"),
        ("Tell me about Oslo.", {"type": "function", "function": {"name": "get_time"}}, "get_time"),
        ("Use get_time for Oslo.", "none", None),
    ],
)
def test_openai_tool_choice(
    client: openai.OpenAI, text: str, tool_choice: Any, expected: str | None
) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": text}],
        tools=[WEATHER_TOOL, TIME_TOOL],  # type: ignore[list-item]
        tool_choice=tool_choice,
    )
    calls = completion.choices[0].message.tool_calls
    if expected is None:
        assert not calls and completion.choices[0].finish_reason == "stop"
    else:
        assert calls and calls[0].function.name == expected  # type: ignore[union-attr]
        assert completion.choices[0].finish_reason == "tool_calls"


def test_openai_web_search_as_the_seed_shows(client: openai.OpenAI) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "Use web search to find the official Kimi homepage URL."}
    ]
    tools: Any = [{"type": "web_search"}]
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=tools, reasoning_effort="low"
    )
    assert first.choices[0].finish_reason == "tool_calls"
    assistant = first.choices[0].message
    # Kimi's builtin_function call type is outside the SDK's types: dump without warnings
    messages.append(assistant.model_dump(exclude_none=True, warnings=False))
    for call in assistant.model_dump(warnings=False)["tool_calls"]:
        assert call["type"] == "builtin_function"
        assert call["function"]["name"] == "$web_search"
        messages.append(
            {
                "role": "tool",
                "tool_call_id": call["id"],
                "name": "$web_search",
                "content": call["function"]["arguments"],  # sent back unchanged
            }
        )
    final = client.chat.completions.create(
        model=MODEL, messages=messages, tools=tools, reasoning_effort="low"
    )
    assert final.choices[0].finish_reason == "stop" and final.choices[0].message.content
    assert final.usage is not None and first.usage is not None
    assert final.usage.prompt_tokens > first.usage.prompt_tokens + 800  # results billed as input


# -- instructor ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "sent"),
    [
        (instructor.Mode.JSON_SCHEMA, "json_schema"),
        (instructor.Mode.JSON, "json_object"),
        (instructor.Mode.MD_JSON, "text"),  # the schema in the system message, a ```json ask
        (instructor.Mode.TOOLS, "tools"),
    ],
)
def test_instructor_modes(sim: Simulator, mode: instructor.Mode, sent: str) -> None:
    with openai.OpenAI(base_url=sim.openai_base_url, api_key=sim.api_key, max_retries=0) as raw:
        client = instructor.from_openai(raw, mode=mode)
        review = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": REVIEW_TEXT}],
            response_model=Review,
            max_retries=0,  # the first answer must already validate
        )
    assert isinstance(review, Review) and 1 <= review.rating <= 5
    body = last_body(sim)
    if sent == "tools":
        assert body["tool_choice"]["function"]["name"] == "Review"
    elif sent == "text":
        assert "response_format" not in body
        assert sim.history[-1].response is not None
        content = sim.history[-1].response["choices"][0]["message"]["content"]
        assert content.startswith("```json\n") and content.endswith("\n```")
    else:
        assert body["response_format"]["type"] == sent


# -- pydantic-ai ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "model_class"),
    [("tool", Review), ("prompted", Review), ("tool", Person), ("prompted", Person)],
)
def test_pydantic_ai_moonshot_provider(
    sim: Simulator, output: str, model_class: type[BaseModel]
) -> None:
    """pydantic-ai's Moonshot provider; its base URL is fixed, so (as its docs show for any
    OpenAI-compatible provider) it takes an ``openai_client`` pointed at the simulator."""
    provider = MoonshotAIProvider(
        openai_client=openai.AsyncOpenAI(
            base_url=sim.openai_base_url, api_key=sim.api_key, max_retries=0
        )
    )
    model = OpenAIChatModel(MODEL, provider=provider)
    wrapper = ToolOutput if output == "tool" else PromptedOutput
    agent = Agent(model, output_type=wrapper(model_class), retries=0)
    before = len(sim.history)
    for attempt in range(3):
        result = agent.run_sync(f"{REVIEW_TEXT} ({attempt})")
        assert isinstance(result.output, model_class)
    assert len(sim.history) == before + 3  # no retry was needed
    body = last_body(sim)
    if output == "tool":  # Moonshot's profile never sends "required": the model must call anyway
        assert body.get("tool_choice", "auto") == "auto" and body["tools"]
    else:
        assert body["response_format"] == {"type": "json_object"}


# -- langchain-openai ----------------------------------------------------------------------------


class Joke(BaseModel):
    setup: str
    punchline: str


@pytest.mark.parametrize(
    "prompt",
    [
        # the phrasings of langchain-openai's own docs for json_mode
        "Tell me a joke about cats, respond in JSON with `setup` and `punchline` keys",
        "Answer the following question. Make sure to return a JSON blob with keys 'setup' and "
        "'punchline'.\n\nWhat do cats find funny?",
    ],
)
@pytest.mark.parametrize("schema", [None, Joke])
def test_langchain_json_mode(sim: Simulator, prompt: str, schema: type[BaseModel] | None) -> None:
    llm = ChatOpenAI(model=MODEL, base_url=sim.openai_base_url, api_key=sim.api_key, max_retries=0)  # type: ignore[call-arg]
    structured = llm.with_structured_output(schema, method="json_mode", include_raw=True)
    out = structured.invoke(prompt)
    assert out["parsing_error"] is None
    parsed = out["parsed"]
    if schema is None:
        assert isinstance(parsed, dict) and list(parsed) == ["setup", "punchline"]
    else:
        assert isinstance(parsed, Joke)
    assert last_body(sim)["response_format"] == {"type": "json_object"}


def test_langchain_json_mode_follows_pydantic_format_instructions(sim: Simulator) -> None:
    # langchain's PydanticOutputParser states an example schema and instance, then the schema
    from langchain_core.output_parsers import PydanticOutputParser

    parser = PydanticOutputParser(pydantic_object=Review)
    llm = ChatOpenAI(model=MODEL, base_url=sim.openai_base_url, api_key=sim.api_key, max_retries=0)  # type: ignore[call-arg]
    structured = llm.with_structured_output(Review, method="json_mode")
    review = structured.invoke(f"{REVIEW_TEXT}\n\n{parser.get_format_instructions()}")
    assert isinstance(review, Review) and 1 <= review.rating <= 5
