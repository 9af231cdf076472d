"""Print how a small dataset is sharded over 2 processes, batch by batch (no processes needed)."""

from torch.utils.data import BatchSampler, RandomSampler

from lightning_shard import BatchSamplerShard, SeedableRandomSampler


def main() -> None:
    dataset = range(10)
    sampler: RandomSampler = SeedableRandomSampler(dataset, data_seed=42)
    for split_batches, batch_size in ((False, 3), (True, 4)):
        batches = BatchSampler(sampler, batch_size=batch_size, drop_last=False)
        print(
            f"split_batches={split_batches}: 10 samples, batch size {batch_size}, 2 processes, even_batches=True"
        )
        for rank in range(2):
            shard = BatchSamplerShard(
                batches, num_processes=2, process_index=rank, split_batches=split_batches
            )
            print(f"  process {rank}: {list(shard)}")


if __name__ == "__main__":
    main()
