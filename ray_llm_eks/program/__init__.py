"""The Pulumi program's wiring, which the checkout's __main__.py reads as its five boxes and one line per option:

- `start`: the stack read, checked and pinned, or one line (no resource before it);
- `boxes`: the network, the cluster and its GPU node pools (or a cluster of the user's own), the KubeRay operator,
  the LLM service: what every stack declares;
- one module per option, each declaring its components only where the stack asks for them (`device_plugins`,
  `karpenter`, `auto_mode`, `weights`, `autoscaler`, `load_balancer`, `observability`): remove one and its line, and
  the rest still wires;
- `outputs`: the stack outputs.

They share one `Graph` (`graph`): what is declared so far, and what the service and the options wait for."""
