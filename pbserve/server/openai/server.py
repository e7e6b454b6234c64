"""The OpenAI endpoint's listener: pbserve's HTTP connection (server/http/protocol.py)
answering with the OpenAI routes, on the InferenceCore the KServe endpoints serve."""

from __future__ import annotations

import asyncio
import logging

from pbserve.core.api import InferenceCore
from pbserve.server.http.limits import HttpLimits
from pbserve.server.http.server import HttpServer, serve
from pbserve.server.listener import Listener
from pbserve.server.openai.chat_template import ChatTemplate
from pbserve.server.openai.conventions import ModelPlans
from pbserve.server.openai.endpoint import Endpoint
from pbserve.server.openai.options import OpenAIOptions
from pbserve.server.openai.routes import OpenAIRoutes

log = logging.getLogger("pbserve.openai")


async def start_openai_server(core: InferenceCore, options: OpenAIOptions,
                              limits: HttpLimits = HttpLimits(),
                              listener: Listener | None = None) -> HttpServer:
    """The OpenAI-compatible endpoint on `listener` (else bound to the options' address
    and port: BindError), with the options' template, loaded here when it was not
    already (ChatTemplateError for a tokenizer that cannot be used)."""
    template = options.template
    if template is None:  # file reads and the tokenizer's parse, off the loop
        template = await asyncio.to_thread(ChatTemplate.load, options.tokenizer,
                                           options.chat_template)
    if template is None:
        log.info("OpenAI endpoint: no --openai-tokenizer or --openai-chat-template: chat "
                 "completions are refused")
    endpoint = Endpoint(core, ModelPlans(core, options.backend), options, template,
                        limits.max_input_size)
    listener = listener or Listener.bind("OpenAI", options.address, options.port)
    return await serve(OpenAIRoutes(endpoint), listener, limits)
