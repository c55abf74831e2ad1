# headline_pack.sh — sourced by the GPU-host scripts that train on the carried pack (bench/train_headline.sh,
# bench/ptq_trained_model.sh): unpacks DIR/lowbit.xz to /tmp/headline/lowbit and DIR/shards.tar (the xz shards of
# scripts/subset_shards.py) to /tmp/headline/shards, once per machine, and sets LOWBIT_BIN and SHARDS.
unpack_headline_pack() {
    local pack=$1 work=/tmp/headline
    mkdir -p "$work"
    [ -x "$work/lowbit" ] || { xz -dc "$pack/lowbit.xz" > "$work/lowbit" && chmod +x "$work/lowbit"; } || return 1
    if [ ! -f "$work/shards/manifest.json" ]; then
        tar -C "$work" -xf "$pack/shards.tar" && (cd "$work/shards" && for f in *.xz; do xz -d "$f"; done) || return 1
    fi
    LOWBIT_BIN=$work/lowbit
    SHARDS=$work/shards
}
