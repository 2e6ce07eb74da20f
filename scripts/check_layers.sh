#!/usr/bin/env bash
# Fails (exit 1, naming file and include) when a file includes a header of a
# layer above its own, or a client (tools/, python/, bench/) includes an
# internal header that is not tools-facing. The build runs it (target check_layers, part of ALL),
# so a layering mistake fails the build, not only a review. doc/architecture.md
# describes the layers; the static libraries enforce the same order at link.
#   scripts/check_layers.sh [SOURCE_ROOT]
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

# What each folder may include, as extended regular expressions matched
# against the quoted include path. Each layer may use the ones below it.
pub_io='sluice/(status|metrics|aligned_buffer|stream_copy)\.h'
allow_io="^(io/|$pub_io)"
allow_backends="^(io/|backends/|sluice/(status|metrics|aligned_buffer|stream_copy|backend|backend_wrapper)\.h)"
allow_format="^(io/|format/|sluice/(status|metrics|aligned_buffer|stream_copy|names|safetensors)\.h)"
allow_engine="^(io/|format/|engine/|sluice/(status|metrics|aligned_buffer|stream_copy|backend|backend_wrapper|item_source|names)\.h)"
allow_checkpoint="^(io/|format/|engine/|checkpoint/|sluice/(status|metrics|aligned_buffer|stream_copy|backend|backend_wrapper|item_source|names|store|peer)\.h)"
allow_pipeline="^(io/|format/|engine/|checkpoint/|pipeline/|sluice/(status|metrics|aligned_buffer|stream_copy|backend|backend_wrapper|item_source|names|store|pipeline|maintenance)\.h)"
allow_observe="^(io/|observe/|sluice/(status|metrics|metrics_server)\.h)"
allow_plan="^(sluice/(status|plan)\.h)"
# Public headers: each only the ones its API needs.
allow_public_status="^$"
allow_public_backend="^sluice/status\.h$"
allow_public_backend_wrapper="^sluice/(status|backend)\.h$"
allow_public_item_source="^sluice/status\.h$"
allow_public_names="^sluice/status\.h$"
allow_public_store="^sluice/(status|backend|item_source|names)\.h$"
allow_public_metrics="^$"
allow_public_pipeline="^sluice/(status|store)\.h$"
allow_public_maintenance="^sluice/(status|backend|store)\.h$"
allow_public_plan="^sluice/status\.h$"
allow_public_peer="^sluice/status\.h$"
allow_public_aligned_buffer="^sluice/status\.h$"
allow_public_stream_copy="^$"
allow_public_safetensors="^sluice/status\.h$"
allow_public_metrics_server="^sluice/(status|metrics)\.h$"
# Clients: tools/ (the CLI), python/ (the _sluice module) and bench/ use the
# public headers and their own; a bench of the hash kernels (hash_bench.cc)
# includes those two kernels' headers, the one exception.
allow_tools="^(sluice/[a-z_]+\.h|[a-z_]+\.h)$"
allow_python="^(sluice/[a-z_]+\.h|cuda_copy\.h|py_peer\.h|py_save\.h|py_support\.h)$"
allow_bench="^(sluice/[a-z_]+\.h|(io/content_hash|io/crc32c)\.h)$"

bad=0
check() {  # FILE ALLOWED_REGEX
  local file=$1 allowed=$2 inc
  while IFS= read -r inc; do
    if ! [[ $inc =~ $allowed ]]; then
      echo "layering: $file includes \"$inc\", a header it may not use: one of a layer above its own, or internal (allowed: $allowed)" >&2
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
}
for layer in io backends format engine checkpoint pipeline observe plan; do
  allowed_var=allow_$layer
  while IFS= read -r f; do
    check "$f" "${!allowed_var}"
  done < <(find "src/$layer" -name '*.h' -o -name '*.cc' | grep -Ev '_test\.cc$|_test_fixture\.h$' | sort)
done
for client in tools python bench; do
  allowed_var=allow_$client
  while IFS= read -r f; do
    check "$f" "${!allowed_var}"
  done < <(find "$client" -name '*.h' -o -name '*.cc' | grep -Ev '_test\.cc$|/tests/' | sort)
done
# python/sluice: the core modules (the state-dict API and its staging, lazy
# copies, backlog warnings) know nothing of DCP, Lightning or
# torch-checkpointing; those adapters sit on top of them.
python_core='python/sluice/_state_dict.py python/sluice/_handles.py python/sluice/_lazy.py python/sluice/_backlog.py'
python_adapters='torch\.distributed\.checkpoint|lightning|torch_checkpointing|\.(torch|lightning|torch_checkpointing|dcp_convert|_dcp_[a-z_]+)\b|from \. import .*\b(torch|lightning|torch_checkpointing|dcp_convert|_dcp_[a-z_]+)\b'
for f in $python_core; do
  [ -f "$f" ] || continue
  while IFS= read -r line; do
    echo "layering: $f imports an adapter above it: $line" >&2
    bad=1
  done < <(grep -nE "^[[:space:]]*(import|from)[[:space:]]" "$f" | grep -E "$python_adapters")
done
for h in include/sluice/*.h; do
  base=$(basename "$h" .h)
  allowed_var=allow_public_$base
  if [ -z "${!allowed_var+x}" ]; then
    echo "layering: $h is a public header with no rule in scripts/check_layers.sh" >&2
    bad=1
    continue
  fi
  check "$h" "${!allowed_var}"
done
exit $bad
