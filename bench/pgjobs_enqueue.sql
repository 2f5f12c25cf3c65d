select jobs.enqueue('bench', '{"n": 1}', queue => 'bench');
