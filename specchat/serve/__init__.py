"""``specchat serve``: an OpenAI-compatible HTTP endpoint over the same engine as the app.

One model load serves every request; ``--parallel N`` requests generate at once, each on a
slot of the one llama.cpp context (its thread, its own sequences), and the rest wait in
arrival order. The modules, bottom to top: ``api_errors`` (the
OpenAI error object), ``sampling_request`` and ``message_request`` (the sampler's fields and
a chat's messages, checked), ``parse`` (a request body, checked field by field per endpoint),
``job`` (a request's job: the items its generation posts to its handler), ``prompt`` (a
request's prompt on the loaded model, and what its tools and grammar make of it), ``worker``
(the loaded models, the queue and the generation threads), ``wire`` (compact JSON and
server-sent events), ``figures`` (timings, usage, specchat's figures and log-probabilities
beside a reply's text), ``replies`` (events → OpenAI's chat and completion JSON, and
``/infill``'s), ``responses_request`` (a Responses API request read into a chat, and the
responses kept), ``responses_writer`` (a reply as the Responses API's objects and typed
events), ``cors`` (which web pages may call), ``app`` (the Starlette routes) and ``server``
(the socket and uvicorn).
"""
