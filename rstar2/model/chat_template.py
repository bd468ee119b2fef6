"""The Jinja chat template of the embedded tokenizer (hermes / Qwen layout of docs/format.md).

Renders a system block (the given system message, else `DEFAULT_SYSTEM_PROMPT`), then, when
`tools` are passed, `# Tools` with one JSON schema per line inside `<tools>`. Assistant turns
are written verbatim; an assistant message may also carry HF-style `tool_calls`, each rendered as
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`. Tool messages become
`<tool_response>` blocks inside a user turn; consecutive ones share one turn, as in the released
rStar2 template. `add_generation_prompt` appends `<|im_start|>assistant\\n`.

What it does not do: tokenization (the tokenizer does) or parsing of tool calls (rollout does).
"""

from __future__ import annotations

DEFAULT_SYSTEM_PROMPT = "Use the python tool, then answer as <answer>\\boxed{N}</answer>."
"""The embedded default's short system prompt (no tool schema, to save tokens)."""

# Whitespace is produced only by explicit string literals; every tag trims around itself.
CHAT_TEMPLATE = (
    r"""{%- set ns = namespace(system=none, offset=0) -%}
{%- if messages and messages[0]['role'] == 'system' -%}
  {%- set ns.system = messages[0]['content'] -%}
  {%- set ns.offset = 1 -%}
{%- endif -%}
{%- if ns.system is none -%}{%- set ns.system = '"""
    + DEFAULT_SYSTEM_PROMPT.replace("\\", "\\\\")
    + r"""' -%}{%- endif -%}
{{- '<|im_start|>system\n' + ns.system -}}
{%- if tools -%}
  {{- '\n\n# Tools\n<tools>' -}}
  {%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
  {{- '\n</tools>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in messages[ns.offset:] -%}
  {%- if message['role'] == 'user' or message['role'] == 'system' -%}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- '<|im_start|>assistant\n' + (message['content'] or '') -}}
    {%- for call in (message['tool_calls'] or []) -%}
      {%- set fn = call['function'] if call['function'] is defined else call -%}
      {%- if (message['content'] or '') or not loop.first -%}{{- '\n' -}}{%- endif -%}
      {{- '<tool_call>\n{"name": "' + fn['name'] + '", "arguments": ' -}}
      {%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}
      {%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}
      {{- '}\n</tool_call>' -}}
    {%- endfor -%}
    {{- '<|im_end|>\n' -}}
  {%- elif message['role'] == 'tool' -%}
    {%- set prev = messages[ns.offset + loop.index0 - 1] if loop.index0 > 0 else none -%}
    {%- if prev is none or prev['role'] != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + message['content'] + '\n</tool_response>' -}}
    {%- if loop.last or messages[ns.offset + loop.index0 + 1]['role'] != 'tool' -%}
      {{- '<|im_end|>\n' -}}
    {%- endif -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"""
)
"""Jinja source stored as the tokenizer's `chat_template`."""
