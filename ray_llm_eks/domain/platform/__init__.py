"""What AWS, EKS and Kubernetes offer and allow: instance and region facts, pinned versions, prices, subnets,
placement, pod sizing, image references, teardown order, cluster checks, and the value checks shared by stack keys
and components' Args."""
