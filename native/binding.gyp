{
  "targets": [
    {
      "target_name": "kvshm",
      "sources": ["kvshm.c", "kvhash.c", "kvmatmul.c"],
      "defines": ["NAPI_VERSION=8"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-ffp-contract=off"]
    }
  ]
}
