"""Which provider serves a job: an explicit name, a `provider/model` model, a model prefix or
an allowed-model list, else the default provider."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping

from jobgate import errors
from jobgate.clock import Clock
from jobgate.config import DEFAULT_MAX_OUTPUT_TOKENS, ProviderConfig, RouteConfig, Settings
from jobgate.providers import calls
from jobgate.providers.anthropic import AnthropicProvider
from jobgate.providers.base import Provider
from jobgate.providers.gates import ProviderGates
from jobgate.providers.openai import OpenAIProvider
from jobgate.providers.responses_front import ResponsesFront, wire_for
from jobgate.providers.simulated import SimProvider

# kind -> factory(name, config, clock); adapters for real providers register themselves here.
ProviderFactory = Callable[[str, ProviderConfig, Clock], Provider]
FACTORIES: dict[str, ProviderFactory] = {
    "sim": lambda name, config, clock: SimProvider(
        name, clock=clock, background=config.mode == "background"
    ),
    "openai": lambda name, config, clock: OpenAIProvider(name, config, clock=clock),
    "anthropic": lambda name, config, clock: AnthropicProvider(name, config, clock=clock),
}


_ROUTES_KEPT = 4096  # route() answers cached at most
_RESTART = "was added to the configuration after this process started: restart jobgate to use it"


def _serves(config: ProviderConfig, model: str) -> bool:
    if config.models:
        return model in config.models
    if config.kind == "sim" and config.model_prefixes:
        return any(model.startswith(prefix) for prefix in config.model_prefixes)
    return True


class ProviderRegistry:
    def __init__(
        self,
        providers: Mapping[str, Provider],
        *,
        configs: Mapping[str, ProviderConfig],
        default: str,
        clock: Clock | None = None,
        routes: Mapping[str, RouteConfig] | None = None,
    ) -> None:
        self._providers = dict(providers)
        self._configs = dict(configs)
        self._routes = dict(routes or {})
        self.default = default
        self._clock = clock
        self._fronts: dict[str, ResponsesFront] = {}  # /v1/responses jobs, per provider
        # Backpressure per provider, shared by the worker and the reconciler of this process.
        self.gates = ProviderGates(self._configs, clock=clock)
        self.version = 0  # bumped by each reconfigure: readers of configs() rebuild from it
        # route()'s answers by (provider, model, api): they depend on the configuration only
        # (a model route's breaker-dependent pick is made before), so reconfigure clears them.
        self._routed: dict[tuple[str | None, str | None, str], tuple[Provider, str | None]] = {}
        # Providers the reloaded file adds: they start with the next process, and until then a
        # job that needs one is refused with a sentence saying so.
        self._awaiting_restart: dict[str, ProviderConfig] = {}

    @classmethod
    def from_settings(cls, settings: Settings, *, clock: Clock) -> ProviderRegistry:
        configs = settings.all_providers()
        providers: dict[str, Provider] = {}
        for name, config in configs.items():
            factory = FACTORIES.get(config.kind)
            if factory is None:
                raise errors.ConfigError(
                    f"providers.{name}.kind", f"no adapter for provider kind {config.kind!r}"
                )
            providers[name] = factory(name, config, clock)
        registry = cls(
            providers,
            configs=configs,
            default=settings.default_provider,
            clock=clock,
            routes=settings.routes,
        )
        for alias, route in settings.routes.items():
            for name, model in route.pairs():
                if name not in providers or not registry.serves(name, model):
                    raise errors.ConfigError(
                        f"routes.{alias}.targets",
                        f"{name}:{model}: no configured provider {name!r} serves {model!r}",
                    )
        return registry

    def reconfigure(self, settings: Settings) -> None:
        """Apply a reloaded file's rate limits, concurrency caps and routes to the running
        providers (services.config_reload); raises errors.ConfigError, changing nothing,
        when a route names a target no provider serves."""
        wanted = settings.all_providers()
        configs = {
            name: config.reloaded(wanted[name]) if name in wanted else config
            for name, config in self._configs.items()
        }
        for alias, route in settings.routes.items():
            for name, model in route.pairs():
                if name not in self._providers or not _serves(configs[name], model):
                    raise errors.ConfigError(
                        f"routes.{alias}.targets",
                        f"{name}:{model}: no configured provider {name!r} serves {model!r}",
                    )
        self._configs = configs
        self._routes = dict(settings.routes)
        self._awaiting_restart = {n: c for n, c in wanted.items() if n not in self._providers}
        self.gates.reconfigure(configs)
        self._routed = {}
        self.version += 1

    def require_credentials(self, *, native_batches: bool = False) -> None:
        """Raise errors.ConfigError naming the first provider whose key variable is unset
        (for the roles that call providers; checked when they start). `native_batches`: only
        the providers configured with native batches (what the batches role calls)."""
        for name, config in self._configs.items():
            if native_batches and not config.native_batches:
                continue
            if name in self._providers and (missing := calls.missing_key(name, config)):
                raise missing

    def names(self) -> list[str]:
        return sorted(self._providers)

    def get(self, name: str, *, api: str = "jobs") -> Provider:
        """The provider `name` as jobs of `api` see it: /v1/responses jobs (api `responses`)
        reach it through its ResponsesFront (native, or translated to the wire it speaks)."""
        try:
            provider = self._providers[name]
        except KeyError:
            note = _RESTART if name in self._awaiting_restart else ""
            raise errors.UnknownProvider(name, note=note) from None
        if api != "responses":
            return provider
        front = self._fronts.get(name)
        if front is None:
            config = self._configs.get(name)
            wire = wire_for(provider.kind, config.responses_api if config else "native")
            front = self._fronts[name] = ResponsesFront(
                provider, wire, clock=self._clock, output_bound=self._output_bound(name)
            )
        return front

    def config(self, name: str) -> ProviderConfig:
        return self._configs[name]

    def _output_bound(self, name: str) -> Callable[[str | None], int]:
        """The provider's bound on a model's output cap, as its configuration says now (a
        reload may change it)."""

        def bound(model: str | None) -> int:
            config = self._configs.get(name)
            return config.output_bound(model) if config else DEFAULT_MAX_OUTPUT_TOKENS

        return bound

    def configs(self) -> dict[str, ProviderConfig]:
        """Every configured provider's settings, by name."""
        return {name: self._configs[name] for name in self._providers if name in self._configs}

    def route(
        self, provider: str | None, model: str | None, *, api: str = "jobs"
    ) -> tuple[Provider, str | None]:
        """The provider for a job of `api` and the model name to send it (a `provider/` prefix
        removed).

        Raises errors.UnknownProvider; errors.InvalidRequest `model_not_allowed` when the named
        provider's `models` list leaves the model out, and `model_not_found` when no provider
        serves the model at all (DESIGN §9: a simulator never answers for a real model)."""
        if provider is None and model in self._routes:
            provider, model = self.first_target(model)
        key = (provider, model, api)
        routed = self._routed.get(key)
        if routed is None:
            routed = self._route(provider, model, api)
            if len(self._routed) >= _ROUTES_KEPT:  # clients choose the models: stay bounded
                self._routed.clear()
            self._routed[key] = routed
        return routed

    def _route(
        self, provider: str | None, model: str | None, api: str
    ) -> tuple[Provider, str | None]:
        if provider is None and model and "/" in model:
            head, _, rest = model.partition("/")
            if head in self._providers:
                provider, model = head, rest
        if provider is None and model:
            provider = self._by_model(model)
            if provider is None:
                if not self.serves(self.default, model):
                    raise self._not_found(model)
                provider = self.default
        name = provider or self.default
        chosen = self.get(name, api=api)
        allowed = self._configs[name].models
        if allowed and model not in allowed:
            raise errors.InvalidRequest(
                f"provider {name!r} does not allow model {model!r}",
                param="body.model",
                code="model_not_allowed",
            )
        if model is not None and not self.serves(name, model):
            raise self._not_found(model, provider=name)
        return chosen, model

    def route_of(self, alias: str | None) -> RouteConfig | None:
        """The model route named `alias`, if one is configured."""
        return None if alias is None else self._routes.get(alias)

    def first_target(self, alias: str) -> tuple[str, str]:
        """The first target of a route whose breaker (in this process) is not open; the
        first target when all are."""
        targets = self._routes[alias].pairs()
        return next((t for t in targets if self._healthy(t[0])), targets[0])

    def next_target(self, alias: str, provider: str, model: str) -> tuple[str, str] | None:
        """The healthy target after (provider, model) in the route, or None at its end."""
        targets = self._routes[alias].pairs()
        at = targets.index((provider, model)) if (provider, model) in targets else -1
        return next((t for t in targets[at + 1 :] if self._healthy(t[0])), None)

    def _healthy(self, name: str) -> bool:
        gate = self.gates.gate(name)
        return gate is None or gate.breaker.state != "open"

    def serves(self, name: str, model: str) -> bool:
        """Whether provider `name` answers for `model`: its `models` list if it has one; a
        simulator (kind `sim`) with `model_prefixes` only those (the built-in `sim`: `sim-*`);
        any other provider every model."""
        return _serves(self._configs[name], model)

    def _not_found(self, model: str, *, provider: str | None = None) -> errors.InvalidRequest:
        later = [n for n, c in self._awaiting_restart.items() if _serves(c, model)]
        if provider:
            message = f"provider {provider!r} does not serve model {model!r}"
        elif later:
            message = f"model {model!r} is served by provider {later[0]!r}, which {_RESTART}"
        else:
            message = f"no configured provider serves model {model!r}"
        return errors.InvalidRequest(
            f"{message}; providers: {', '.join(self.names())} "
            "(the built-in `sim` serves `sim-*` models only)",
            param="body.model",
            code="model_not_found",
        )

    def _by_model(self, model: str) -> str | None:
        for name, config in self._configs.items():
            if model in config.models:
                return name
        for name, config in self._configs.items():
            if any(model.startswith(prefix) for prefix in config.model_prefixes):
                return name
        return None

    async def aclose(self) -> None:
        for provider in self._providers.values():
            with contextlib.suppress(Exception):
                await provider.aclose()
